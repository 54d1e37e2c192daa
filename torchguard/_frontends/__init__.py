"""Front-ends: the command line, ``check`` through pip's resolver, and the pytest plugin."""
