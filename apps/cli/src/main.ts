#!/usr/bin/env node
/** The `turnwarden` command. */
import { runCli } from './cli.js';
import { processOutput } from './output.js';

process.exitCode = await runCli(process.argv.slice(2), processOutput());
