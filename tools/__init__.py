"""catmap's runnable tools: the demo, dataset browsing and statistics, benchmarks.

Each tool runs from a clone as ``python -m tools.<name>``. The everyday ones are installed as the
package ``catmap_tools`` (never a top-level ``tools``) with their console scripts
(``catmap-demo``, ``catmap-browse``, ``catmap-analyze``, ``catmap-cache``, ``catmap-shapes``,
``catmap-benchmark-loader``, ``catmap-shards``); the benchmarks and fuzzers are not installed. Every ``--help``
shows the defaults.
"""
