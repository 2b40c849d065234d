"""C sources of the Kineto reader's compiled passes, and the extension modules built from them.

``_eventdecode`` (events into columns), ``_eventreduce`` (a chunk to the canonical frames' rows),
``_eventassemble`` (a small trace's frames) and ``_mapguard`` (memory maps safe from a file cut
shorter). Each is optional: the Python modules beside this folder fall back to Polars without it.
"""
