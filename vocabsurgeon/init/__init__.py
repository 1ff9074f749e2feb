"""The init room: where new rows come from.

`strategies` holds the row statistics and the closed-form strategies (mean, mean-noise, sub-word mean, ...);
`fitted` the inits that run the model; `rows` turns a plan into the new rows of every vocabulary tensor.
"""

from .strategies import (DEFAULT_EPS, MAX_SEED, STRATEGIES, InitContext, NewRows, RowStats, Strategy,
                         accumulate_stats, check_eps, check_seed, encode_rows, get_strategy, pieces_mean,
                         strategies_help)

__all__ = ["DEFAULT_EPS", "MAX_SEED", "STRATEGIES", "InitContext", "NewRows", "RowStats", "Strategy",
           "accumulate_stats", "check_eps", "check_seed", "encode_rows", "get_strategy", "pieces_mean",
           "strategies_help"]
