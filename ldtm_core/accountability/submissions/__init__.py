"""Models LDTM does not run: registered by name (`external`), their evenings' forecasts submitted as files
(`submit`), recorded, filled back and judged on their live record (`judge`) like any model's."""
