# burnrate's image. Node 24 runs the TypeScript sources directly (type stripping),
# so there is no build step: one stage installs the production dependencies, the other holds
# them and the files the server reads at run time, nothing else.
#
#   docker build -t burnrate:0.1.0 .
#   docker run -d -p 8080:8080 -v burnrate-data:/data burnrate:0.1.0     # embedded: chDB + segment log under /data
#
# Both stages use one pinned Node release: the one package.json's `node` devDependency runs
# the tests on. Raise both tags together.

FROM node:24.21.0-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# `npm install` (it follows package-lock.json), not `npm ci`: the lock file records chDB's engine
# package only for the platform it was written on, and npm ci refuses a lock file that lacks the
# other platforms' optional packages (.ci/run). npm install keeps every locked version and adds
# the engine of the platform being built (an arm64 build gets @chdb/lib-linux-arm64-gnu).
# The engine is needed even with CLICKHOUSE_URL: src/storage/clickhouse.ts imports chdb/connection.
RUN npm install --omit=dev --no-audit --no-fund && npm cache clean --force

FROM node:24.21.0-bookworm-slim AS runtime
ENV NODE_ENV=production HOST=0.0.0.0 PORT=8080 DATA_DIR=/data
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
# What the server reads at run time: the sources and their Lua scripts (src/**), the
# migrations (sql/), the built-in dashboard's static files (public/), the entry point (bin/)
# and package.json ("type": "module").
# test/deploy-image.test.ts checks this list against the server's imports and file reads.
COPY package.json ./
COPY bin ./bin
COPY src ./src
COPY sql ./sql
COPY proto ./proto
COPY public ./public
# DATA_DIR must belong to the user the server runs as: it creates its admin socket there
# (and, embedded, its ClickHouse data and journal). A volume mounted on a fresh /data takes
# this owner from the image; the sources above stay root's, read-only to the server.
RUN mkdir -p /data && chown node:node /data
USER node
VOLUME /data
EXPOSE 8080
# /readyz: the hot state answers and the journal has room (slim images have no curl: node's fetch).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/readyz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "bin/burnrate.js"]
CMD ["serve"]
