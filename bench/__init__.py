"""The benchmarks, one module each (run as `python -m bench.NAME`); bench/README.md is the index."""
