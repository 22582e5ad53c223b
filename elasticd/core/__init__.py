"""The pure job/node state machine: events in, actions out; no I/O, no clock, no asyncio.

The daemon feeds it real events and the simulator simulated ones, so a schedule computed in
virtual time is the schedule the daemon would have produced.
"""
