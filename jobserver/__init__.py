"""jobserver: a distributed job server over one metadata store and a pluggable lock backend."""

__version__ = "0.1.0"
