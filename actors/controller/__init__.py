"""The controller: pure decisions (assignment, elections, state) and, later, its actor."""
