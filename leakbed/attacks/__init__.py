"""What an attack is: the contract, the registry of published attacks and leakbed's own attacks, grouped by
family. Everything here runs only inside a sandbox (``workers``); trusted code never imports it.
"""
