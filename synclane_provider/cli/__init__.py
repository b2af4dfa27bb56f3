"""``airflow synclane …``: the operator's commands, registered through the provider info's ``cli`` key."""
