/** The demo tools and the shared abort-aware waiting helpers. */
export { demoTools } from './demo.js';
