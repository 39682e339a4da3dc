"""The only code that opens session files: durable primitives (``fsio``), one writer
per session (``writer``), where sessions live (``store``) and the SQLite index, a
cache rebuildable from the files: ``index`` (the object callers hold) over
``index_file`` (the file and its resilience), ``index_build`` (freshness and
building, with ``index_scan``) and ``index_query`` (what is asked of it); its rows
(``rows``) import no SQLite."""
