"""The producer (Kafka's ``org.apache.kafka.clients.producer``): ``producer.py`` the API
(``send``, ``send_batch``, ``flush``), ``sender_thread.py`` the sender thread (the shell),
``sender.py`` its decisions (pure), ``accumulator.py`` the RecordAccumulator,
``arrow_plan.py`` how ``send_batch`` partitions and batches Arrow columns, ``futures.py``
the futures a send returns, ``config.py`` its settings."""
