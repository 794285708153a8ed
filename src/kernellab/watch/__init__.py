"""`invoke watch`: rebuild and recheck one op on every save.

serve    the long-lived watcher (`python -m kernellab.watch`)
rounds   one round (build, load, check, optionally bench) in a forked child
screen   one round's result and the screen that shows it

Import the module you need; this face imports nothing.
"""
