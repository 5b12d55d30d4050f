export { playScripts } from './player.js';
export {
  type Chunk,
  type Exchange,
  type LoopbackOptions,
  LoopbackServer,
  type Reply,
  type RequestBody,
  textReply,
} from './server.js';
