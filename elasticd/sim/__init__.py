"""The discrete-event driver: the daemon's core and policies, a virtual clock, SWF traces."""
