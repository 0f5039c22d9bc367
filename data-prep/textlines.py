"""How every data-prep step reads a text file: the one place that decides what a line is.

A line ends at "\n" and only there. U+2028, U+0085, form feeds and the like are characters
inside a line (str.splitlines() would split at them; this module never does), the last line
counts whether or not "\n" follows it, and line numbers are physical lines of the file,
counted from 1, header included. Three things are normalised as a file enters:
  - a "\r" at the end of a line goes ("\r\n" files read as "\n" files);
  - any other "\r" becomes a space: every Python tool downstream (sacremoses, fairseq,
    open() in text mode) would end a line there and break the alignment of the splits;
  - a UTF-8 byte order mark at the start of the file goes.
A byte that is not UTF-8 stops the reading with the file, the line, the column and the byte.
Plain standard library; gzip files (.gz) are read the same way.

The other characters at which str.splitlines() splits are kept as they are (a reference keeps
its text); ``spaces`` turns them into spaces where text goes into a tokenizer or a BPE model,
as sacremoses does, so that every tool sees them as the whitespace they are.
"""

import gzip
import zlib

# what str.splitlines() ends a line at, besides "\n" and "\r"
LINE_SEPARATORS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_TO_SPACES = str.maketrans(dict.fromkeys(LINE_SEPARATORS, " "))


class TextError(Exception):
    """A file that cannot be read as UTF-8 text; the message names the file and the line."""


def lines(path, name=None):
    """Yields (number, text) for each line of ``path``, without its line end.

    ``name`` is the file as messages call it (default: ``path``), e.g. ARCHIVE:MEMBER.
    """
    name = name or str(path)
    opener = gzip.open if str(path).endswith(".gz") else open
    number = 0
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):  # a binary file splits at b"\n" only
                yield number, decode(raw, name, number)
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise TextError(f"{name}: not a complete gzip file ({error}) after line {number}: get a fresh copy") from None


def decode(raw, name, number):
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        column = len(raw[: error.start].decode("utf-8", errors="replace")) + 1
        raise TextError(
            f"{name}: line {number}, column {column}: byte 0x{raw[error.start]:02x} is not UTF-8 "
            f"({error.reason}); the file must be UTF-8 text (convert it, e.g. iconv -f LATIN1 -t UTF-8)"
        ) from None
    return text.replace("\r", " ")


def spaces(text):
    """``text`` with its line separators other than "\n" and "\r" (U+2028, U+0085, ...) as spaces."""
    return text.translate(_TO_SPACES)
