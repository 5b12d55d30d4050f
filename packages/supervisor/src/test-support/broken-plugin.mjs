// A plugin module that fails at import, inside every worker.
throw new Error('this plugin is broken');
