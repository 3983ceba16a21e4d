"""The transaction coordinator (Kafka's TransactionCoordinator and TransactionStateManager):
pure decisions (``metadata.py``, ``transaction_log.py``) and, later, the actor shell."""
