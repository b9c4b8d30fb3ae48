#!/bin/bash
echo '{"retries": 3}' > /app/config.json
