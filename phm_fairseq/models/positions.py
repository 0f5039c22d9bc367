"""fairseq's sinusoidal position table: a constant kept out of checkpoints, set again by every load."""

from fairseq.modules import SinusoidalPositionalEmbedding


def set_positions_at_every_load(side) -> None:
    """Every ``load_state_dict`` of ``side`` (an encoder or a decoder) sets its sinusoidal position table
    again: fairseq keeps it in a buffer that is in no checkpoint, and ``to_empty()`` (after a construction
    on the meta device) leaves it uninitialised."""
    side.register_load_state_dict_post_hook(_set_positions)


def _set_positions(side, incompatible_keys) -> None:
    positions = getattr(side, "embed_positions", None)
    if isinstance(positions, SinusoidalPositionalEmbedding):
        table = positions.weights
        positions.weights = SinusoidalPositionalEmbedding.get_embedding(
            table.size(0), positions.embedding_dim, positions.padding_idx
        ).to(side.embed_tokens.weight.device, table.dtype)
