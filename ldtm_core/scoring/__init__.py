"""ldtm_core.scoring: pure scoring functions (the exact skill test, the baselines), shared by `learning/`
(the backtest scores its folds) and `accountability/` (the gate, the board); imports only the base and
`data/`."""
