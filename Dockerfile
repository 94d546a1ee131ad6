# syntax=docker/dockerfile:1
# One image for both services: `api` (default command) and `encoder`
# (command: node --min-semi-space-size=16 dist/services/encoder/main.js). Both run compiled JavaScript on plain node:
# no TypeScript, tsx or esbuild in the image.
# Node 24 LTS by default; 20 is tested too (package.json `engines`, .ci/run):
# `docker build --build-arg NODE_VERSION=20 .`
ARG NODE_VERSION=24

# Stage 1: compile. All dependencies (TypeScript is a dev dependency), then `npm run build` → dist/.
FROM node:${NODE_VERSION}-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY scripts/build.mjs scripts/build.mjs
# The `prepare` hook would build before the sources are here; the build runs below instead.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json index.ts ./
COPY shared shared
COPY services services
COPY cli cli
RUN npm run build

# Stage 2: production dependencies only, exactly as locked (no TypeScript, tsx or DuckDB:
# @duckdb/node-api is an optional peer used only by the `query` command). `prepare` finds no
# TypeScript here and skips the build.
FROM node:${NODE_VERSION}-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
COPY scripts/build.mjs scripts/build.mjs
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# Rollup image (`docker build --target rollup`): the runtime below plus DuckDB, which writes the
# rollups; the api and encoder image stays without it.
FROM deps AS rollup-deps
RUN npm install --no-save --omit=dev --no-audit --no-fund "@duckdb/node-api@$(node -p "require('./package-lock.json').packages['node_modules/@duckdb/node-api'].version")" \
    && npm cache clean --force

FROM node:${NODE_VERSION}-bookworm-slim AS rollup
ENV NODE_ENV=production HOST=0.0.0.0 METRICS_PORT=9465 DATA_DIR=/app/data
WORKDIR /app
COPY --from=rollup-deps --chown=node:node /app/node_modules ./node_modules
COPY --from=build --chown=node:node /app/dist ./dist
COPY --chown=node:node package.json ./
RUN mkdir -p /app/data && chown node:node /app/data
USER node
EXPOSE 9465
CMD ["node", "dist/services/rollup/main.js"]

# Stage 3: runtime (the default target). Production node_modules, the compiled dist/ and the CLI launcher.
FROM node:${NODE_VERSION}-bookworm-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8787 \
    METRICS_PORT=9464 \
    DATA_DIR=/app/data \
    MALLOC_MMAP_THRESHOLD_=131072
# MALLOC_MMAP_THRESHOLD_: glibc returns large freed buffers to the system at once, so an encoder
# that took a burst of large batches comes back near its idle RSS (docs/operations.md, "After a burst").
# The chart and docker-compose.yml run the API with 1048576: at 128 KiB every body of 128 KiB-1 MiB
# is a fresh mapping, whose page faults cost a 1,000-event push 5-40% more CPU (decision 0027).
WORKDIR /app
COPY --from=deps --chown=node:node /app/node_modules ./node_modules
COPY --from=build --chown=node:node /app/dist ./dist
COPY --chown=node:node package.json ./
COPY --chown=node:node bin bin
# The filesystem store (STORE=fs) writes here; the image runs as the unprivileged `node` user.
RUN mkdir -p /app/data && chown node:node /app/data
USER node
EXPOSE 8787 9464
CMD ["node", "--min-semi-space-size=16", "dist/services/api/main.js"]
