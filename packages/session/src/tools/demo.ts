import type { Tool } from '../contracts.js';
import { echoTool } from './echo.js';
import { failTool } from './fail.js';
import { heartbeatTool } from './heartbeat.js';
import { sleepTool } from './sleep.js';
import { transferTool } from './transfer.js';
import { wedgeTool } from './wedge.js';

/**
 * The demo tools: sleep, heartbeat, wedge, echo, fail, and transfer — which needs a person's
 * approval (a new array on every call).
 */
export function demoTools(): Tool[] {
  return [sleepTool, heartbeatTool, wedgeTool, echoTool, failTool, transferTool];
}
