# The jobserver image that docker-compose.yml runs: one node (or one `db upgrade`) per
# container. The project is installed in place (-e) because the Alembic migrations are
# read from the source tree.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    JOBSERVER_DATA_DIR=/var/lib/jobserver

WORKDIR /opt/jobserver
COPY . .
RUN pip install --no-cache-dir -e '.[postgres,zookeeper]' \
 && useradd --system --create-home --home-dir /var/lib/jobserver jobserver

USER jobserver
EXPOSE 8080
CMD ["jobserver", "serve"]
