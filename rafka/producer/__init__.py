"""The producer (Kafka's ``org.apache.kafka.clients.producer``): ``producer.py`` the API and
its sender thread, ``sender.py`` the sender's decisions (pure), ``accumulator.py`` the
RecordAccumulator, ``futures.py`` the futures a send returns."""
