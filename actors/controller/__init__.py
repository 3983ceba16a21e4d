"""The controller: pure decisions (``state.py``, ``state_machines.py``, ``election.py``,
``assignment.py``) and ``ControllerActor`` (``actor.py``), the shell around them."""
