"""Tools for developers that are not benchmarks (run as `python -m tools.NAME`); listed in bench/README.md."""
