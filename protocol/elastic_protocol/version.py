"""Protocol version and limits, shared so that both ends refuse the same things."""

PROTOCOL_VERSION = 1

# A line longer than this (excluding the newline) is refused with an error and the
# connection closed: past it the framing cannot be trusted.
MAX_LINE_BYTES = 64 * 1024
# A job file is at most this long (what fits a submit line even with every character escaped).
MAX_JOB_FILE_BYTES = 32 * 1024

# Replies on the control channel carry whole queue documents: a client accepts lines up to
# this size (requests stay under MAX_LINE_BYTES).
MAX_REPLY_BYTES = 256 * 1024 * 1024

# Application-channel lines are short by nature (a grow order names hosts); a smaller limit
# keeps a C client's buffer small.
MAX_APP_LINE_BYTES = 8 * 1024
