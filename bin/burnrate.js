#!/usr/bin/env node
// burnrate runs its TypeScript sources as they are: Node.js strips the types, without a flag
// from 22.18 (23.6 on the 23 line). This file stays plain JavaScript that older versions parse,
// and checks the version before the first .ts import (a static import would be loaded, and
// fail with a syntax error, before any line here ran).
const [major = 0, minor = 0] = process.versions.node.split('.').map(Number)
const stripsTypes = major > 23 || (major === 23 && minor >= 6) || (major === 22 && minor >= 18)

if (stripsTypes) {
  await import('../src/cli/main.ts')
} else {
  process.stderr.write(
    `burnrate needs Node.js >= 22.18 (this is ${process.versions.node}): install Node.js 24 LTS, ` +
      'or run `npx burnrate` in the burnrate repository, which uses its node@24 devDependency\n',
  )
  process.exitCode = 1
}
