psql -h db -U postgres -c 'create table users (id int)'
