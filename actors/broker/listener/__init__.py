"""The broker's Kafka listener: Kafka's SocketServer (``socket_server``) and KafkaApis
(``kafka_apis``, dispatching by ``ApiKey`` to one handler module per API family), the
versions served (``api_versions``), and where a request's partitions go on this broker
(``partition_route``)."""
