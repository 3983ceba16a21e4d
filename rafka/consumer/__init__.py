"""The consumer (Kafka's ``org.apache.kafka.clients.consumer``): ``consumer.py`` the API,
``fetcher.py`` its fetches and the records they buffer, ``subscription_state.py`` each
assigned partition's state, ``arrow_table.py`` polled records as Arrow, ``coordinator.py``
the group member's side of the group protocol (Kafka's ConsumerCoordinator),
``membership.py`` its membership state (pure), ``config.py`` its settings."""
