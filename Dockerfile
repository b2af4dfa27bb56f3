# Airflow's official image with this provider (and its demo) installed: used by docker-compose.yaml.
ARG AIRFLOW_VERSION=3.3.2
FROM apache/airflow:${AIRFLOW_VERSION}-python3.11
ARG AIRFLOW_VERSION

COPY --chown=airflow:0 pyproject.toml README.md /opt/synclane/
COPY --chown=airflow:0 synclane_provider /opt/synclane/synclane_provider
COPY --chown=airflow:0 synclane_demo /opt/synclane/synclane_demo
COPY --chown=airflow:0 airflow_provider_synclane /opt/synclane/airflow_provider_synclane
COPY --chown=airflow:0 dags /opt/synclane/dags
# Naming Airflow's version keeps pip from replacing the image's Airflow while it installs the provider;
# the celery extra is what the compose file's celery profile runs on.
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" "/opt/synclane[celery]"
