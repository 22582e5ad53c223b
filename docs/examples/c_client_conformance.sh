gcc -O2 -Wall -o elastic_client apps/c/elastic_client.c
python3 protocol/conformance/run_client.py -- $PWD/elastic_client '{orders}'
