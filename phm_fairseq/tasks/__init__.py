"""tasks of the plugin, registered with fairseq on import."""
