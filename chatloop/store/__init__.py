"""The only code that opens session files: durable primitives (``fsio``), one writer
per session (``writer``), where sessions live (``store``) and the SQLite index
(``index``, ``index_scan``), a cache rebuildable from the files."""
