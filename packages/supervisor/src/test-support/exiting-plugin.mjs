// A plugin module that ends its worker thread at import (not an error the registry can report).
process.exit(3);
