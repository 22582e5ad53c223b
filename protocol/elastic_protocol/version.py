"""Protocol version and limits, shared so that both ends refuse the same things."""

PROTOCOL_VERSION = 1

# A line longer than this (excluding the newline) is refused with an error and the
# connection closed: past it the framing cannot be trusted.
MAX_LINE_BYTES = 64 * 1024

# Application-channel lines are short by nature (a grow order names hosts); a smaller limit
# keeps a C client's buffer small.
MAX_APP_LINE_BYTES = 8 * 1024
