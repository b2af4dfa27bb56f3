"""SyncLane in Airflow's UI: the page (a FastAPI app with its own static files) and where Airflow shows it."""
