"""The figures of ``bench.run``, one module each (``bench.figure``)."""
