"""Where cases run: local worker processes forked from the fork server, or Ray actors; the worker loop
and the watch that ends a worker with its runner."""
