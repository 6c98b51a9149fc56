"""Model recipes beyond the per-ticker LSTM: tabular models fitted on a panel of many tickers."""
