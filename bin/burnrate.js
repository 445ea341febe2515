#!/usr/bin/env node
// Node >= 22.18 runs TypeScript by stripping types; no build step.
import '../src/cli/main.ts'
