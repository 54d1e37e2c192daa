"""The Linux machine described: ld.so's inputs (cache, environment, mapped objects) and files."""
