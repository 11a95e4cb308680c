"""Threads, processes, pools, queues, pickling and the distributed world."""
