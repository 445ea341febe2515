#!/bin/bash
# Grafana's read-only ClickHouse user, mounted into /docker-entrypoint-initdb.d/.
#
# The ClickHouse image runs this on its first start (an empty data volume), after it has created
# CLICKHOUSE_DB and the admin user CLICKHOUSE_USER (with CLICKHOUSE_DEFAULT_ACCESS_MANAGEMENT=1,
# which lets that user create users). It sources the file, or runs it when it is executable:
# both work (no `exit`, no shell options changed).
#
# - `grafana` may only SELECT, on burnrate's database: `burnrate.*` covers the tables and views
#   burnrate's migrations create later too (ClickHouse grants on a database wildcard).
# - Its profile sets readonly = 1: no INSERT, DDL or SET, even of settings. The one exception is
#   max_execution_time, which the Grafana ClickHouse plugin sets on every query (its timeout);
#   CHANGEABLE_IN_READONLY needs access_control_improvements.settings_constraints_replace_previous,
#   which ClickHouse servers enable by default.
# - Password: GRAFANA_CLICKHOUSE_PASSWORD (default `grafana`: change it). The same variable reaches
#   Grafana's data source. To change it later (this file runs on the first start only), set the
#   new value and run `docker compose up -d` then
#   `docker compose exec clickhouse bash /docker-entrypoint-initdb.d/grafana-user.sh`.
grafana_password="${GRAFANA_CLICKHOUSE_PASSWORD:-grafana}"
# It goes into a SQL string literal: escape backslashes, then single quotes.
grafana_password="${grafana_password//\\/\\\\}"
grafana_password="${grafana_password//\'/\\\'}"

clickhouse client --host 127.0.0.1 --user "${CLICKHOUSE_USER:-default}" --password "${CLICKHOUSE_PASSWORD:-}" --multiquery <<SQL
CREATE SETTINGS PROFILE OR REPLACE grafana_readonly SETTINGS readonly = 1, max_execution_time CHANGEABLE_IN_READONLY;
CREATE USER OR REPLACE grafana IDENTIFIED WITH sha256_password BY '${grafana_password}' DEFAULT DATABASE ${CLICKHOUSE_DB:-burnrate} SETTINGS PROFILE 'grafana_readonly';
GRANT SELECT ON ${CLICKHOUSE_DB:-burnrate}.* TO grafana;
SQL
