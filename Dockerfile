# syntax=docker/dockerfile:1
# One image for both services: `api` (default command) and `encoder`
# (command: node --import tsx services/encoder/main.ts). The services are TypeScript run
# through tsx, which is a production dependency, so no build step is needed.
ARG NODE_VERSION=20

# Stage 1: production dependencies only, exactly as locked.
FROM node:${NODE_VERSION}-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# Stage 2: runtime. node_modules from stage 1, sources from the context (.dockerignore keeps
# tests, data, node_modules and the deploy files out).
FROM node:${NODE_VERSION}-bookworm-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8787 \
    METRICS_PORT=9464 \
    DATA_DIR=/app/data
WORKDIR /app
COPY --from=deps --chown=node:node /app/node_modules ./node_modules
COPY --chown=node:node . .
# The filesystem store (STORE=fs) writes here; the image runs as the unprivileged `node` user.
RUN mkdir -p /app/data && chown node:node /app/data
USER node
EXPOSE 8787 9464
CMD ["node", "--import", "tsx", "services/api/main.ts"]
