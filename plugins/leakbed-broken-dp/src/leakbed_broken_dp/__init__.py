"""A DP-FedAvg defense plugin that states one mechanism and runs a weaker one: the privacy audit's adversary."""
