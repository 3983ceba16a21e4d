"""What the engines' connectors share (``rafka.spark`` and ``rafka.ray``, neither importing
the other): offset ranges and their planning, reading a range as Arrow tables, and Arrow rows
sent to a producer."""
