"""Built-in function-form processors, chosen with ``processing.processor``: changelog, dynamodb_replica."""
