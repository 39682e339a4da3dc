"""chatloop's benchmark, a package run from the project root.

    python -m bench.run --quick     every figure, small sizes (what CI runs)
    python -m bench.chain           one bench of its own (each module says how to run it)

``bench.run`` is the registry of figures (``bench.figures``, one module each, the
same interface: ``bench.figure``); the corpus makers (``bench.corpus``,
``bench.transcript``, ``bench.samples``) and the timing and rows (``bench.timing``,
``bench.rows``) are shared; the other modules are the benches the figures call,
each runnable on its own. bench/README.md explains every figure.
"""
