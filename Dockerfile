# burnrate: Node 24 runs the TypeScript sources directly (type stripping), no build step.
FROM node:24-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm install --omit=dev && npm cache clean --force
COPY bin ./bin
COPY src ./src
COPY sql ./sql
ENV HOST=0.0.0.0 PORT=8080 DATA_DIR=/data NODE_ENV=production
EXPOSE 8080
USER node
ENTRYPOINT ["node", "bin/burnrate.js"]
CMD ["serve"]
