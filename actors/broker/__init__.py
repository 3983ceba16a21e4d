"""The broker: its life (``actor.py`` BrokerActor: boot, describe, shutdown; ``lifecycle.py``
registration, heartbeats and controlled shutdown with the controller; ``replica_manager.py``
its replica hosts, Kafka's ReplicaManager role; ``state.py`` the pure decisions;
``config.py``) and its Kafka listener (``listener/``)."""
