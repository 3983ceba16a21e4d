"""The consumer (Kafka's ``org.apache.kafka.clients.consumer``): ``consumer.py`` the API and
its fetches, ``coordinator.py`` the group member's side of the group protocol (Kafka's
ConsumerCoordinator), ``membership.py`` its membership state (pure)."""
