"""catmap's runnable tools: the demo, dataset browsing and statistics, benchmarks.

Each tool runs as ``python -m tools.<name>`` or ``python tools/<name>.py``; the everyday ones are
also installed as console scripts (``catmap-demo``, ``catmap-browse``, ``catmap-analyze``,
``catmap-cache``, ``catmap-shapes``, ``catmap-benchmark-loader``). Every ``--help`` shows the
defaults.
"""
