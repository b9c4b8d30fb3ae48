def test_users_table():
    raise AssertionError("needs the db service")
