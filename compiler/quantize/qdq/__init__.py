"""QDQ input models: checking, cleaning up and measuring a model that arrives quantised."""
